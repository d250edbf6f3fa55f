"""No reference in the repository points at a file that is not there.

The repository's text files (git-tracked, plus new files git does not ignore; nothing under runs/)
are searched for references to repository files:

- markdown links and images in ``.md`` files, resolved relative to the linking file (URLs, anchors
  and links inside code are not references);
- paths that start with a top-level folder of the repository and end with a file extension, resolved
  relative to the repository root: the whole text of non-Python files, and the comments and
  docstrings of Python files (string literals in code are data: tests build paths that do not exist
  on purpose, and a dotted name such as a config key or a module is never a path).

Globs and placeholders (``*``, ``<``, ``{``, ``$``, ``...``) are skipped. Besides existence, every
citation of the design document by section must name a numbered section heading it has, and the
old upper-case name of that document must not appear anywhere.
"""

from __future__ import annotations

import io
import re
import subprocess
import tokenize
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[1]
DESIGN_DOC = "docs/design.md"
#: top-level folders whose files are referenced by path
TOP_FOLDERS = ("docs", "memsys", "research", "benchmarks", "harness", "sandbox", "launcher", "configs", "scripts",
               "tests")
EXTENSIONS = ("md", "py", "yaml", "yml", "sh", "json", "jsonl", "html", "txt", "toml", "cfg", "ini", "png", "csv",
              "cmake")
#: folders of outputs, never scanned and never checked
SKIPPED_FOLDERS = ("runs",)
PLACEHOLDER_MARKS = ("*", "<", ">", "{", "}", "$", "...")
#: mentions of files that are not there on purpose, with why: (file, path) -> reason
NOT_REFERENCES: dict[tuple[str, str], str] = {}
#: records kept as they were written: their paths name files as they were then (the layout has moved since)
HISTORICAL = ("docs/history.md",)

# A path starts a token (not inside a longer path, a URL, a dotted name or a shell variable) and runs
# until a character no repository path here holds; placeholders are kept in the token to be skipped whole.
_PATH_RE = re.compile(r"(?<![\w./\\~$@-])(?:%s)/[\w.*{}<>$+/-]*" % "|".join(TOP_FOLDERS))
_EXT_RE = re.compile(r"\.(?:%s)$" % "|".join(EXTENSIONS))
_LINK_RE = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
_URL_RE = re.compile(r"^(?:[A-Za-z][\w+.-]*:|//)")
_FENCE_RE = re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1[^\n]*$", re.M | re.S)
_INLINE_CODE_RE = re.compile(r"`[^`\n]*`")
_CITATION_RE = re.compile(re.escape(DESIGN_DOC) + r",?\s+sections?\s+(\d+(?:\s*(?:,|and|or|-)\s*\d+)*)", re.I)
_HEADING_RE = re.compile(r"^## (\d+)\. \S", re.M)
#: the design document's old name, spelled so that this file does not contain it
_OLD_NAME = "DESIGN" + ".md"


@dataclass(frozen=True)
class Ref:
    file: str  # repository-relative, POSIX
    line: int
    target: str  # as written

    def __str__(self) -> str:
        return f"{self.file}:{self.line} -> {self.target}"


# --- which files ---------------------------------------------------------------------------------------
def repo_text_files() -> dict[str, str]:
    """Repository-relative path -> text of every text file git tracks or would track (not under runs/)."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, check=True).stdout.decode()
    files: dict[str, str] = {}
    for name in sorted(set(filter(None, out.split("\0")))):
        if PurePosixPath(name).parts[0] in SKIPPED_FOLDERS:
            continue
        path = ROOT / name
        if not path.is_file() or path.is_symlink():
            continue  # deleted in the work tree (a move in progress), or a link
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue
        try:
            files[name] = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
    return files


# --- which parts of a file are prose -------------------------------------------------------------------
def prose_chunks(name: str, text: str) -> list[tuple[int, str]]:
    """(first line, text) of the parts of a file that may reference files: a Python file's comments and
    docstrings (strings that are a statement of their own), any other file whole."""
    if not name.endswith(".py"):
        return [(1, text)]
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return [(1, text)]
    chunks = [(t.start[0], t.string) for t in tokens if t.type == tokenize.COMMENT]
    code = [t for t in tokens if t.type not in (tokenize.NL, tokenize.COMMENT)]
    starts = (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)
    for i, t in enumerate(code):
        if t.type != tokenize.STRING:
            continue
        before = code[i - 1].type if i else tokenize.NEWLINE
        after = code[i + 1].type if i + 1 < len(code) else tokenize.ENDMARKER
        if before in starts and after in (tokenize.NEWLINE, tokenize.ENDMARKER):
            chunks.append((t.start[0], t.string))
    return sorted(chunks)


def _blank(match: re.Match[str]) -> str:
    """The match replaced by spaces, its newlines kept (line numbers stay right)."""
    return re.sub(r"[^\n]", " ", match.group(0))


# --- extraction (pure) ----------------------------------------------------------------------------------
def is_placeholder(target: str) -> bool:
    return any(mark in target for mark in PLACEHOLDER_MARKS)


def extract_paths(text: str) -> list[tuple[int, str]]:
    """(line offset from the text's first line, path) of the repository paths ``text`` names."""
    found = []
    for m in _PATH_RE.finditer(text):
        path = m.group(0).rstrip(".")
        if is_placeholder(path) or not _EXT_RE.search(path):
            continue
        found.append((text.count("\n", 0, m.start()), path))
    return found


def extract_links(text: str) -> list[tuple[int, str]]:
    """(line offset, target) of the markdown links of ``text`` to local files (code left out)."""
    prose = _INLINE_CODE_RE.sub(_blank, _FENCE_RE.sub(_blank, text))
    found = []
    for m in _LINK_RE.finditer(prose):
        target = m.group(1)
        if _URL_RE.match(target) or target.startswith("#"):
            continue
        target = target.split("#", 1)[0].split("?", 1)[0]
        if target and not is_placeholder(target):
            found.append((prose.count("\n", 0, m.start()), target))
    return found


def design_citations(text: str) -> list[tuple[int, str, list[int]]]:
    """(line offset, citation as written, section numbers) of every citation of the design document."""
    found = []
    for m in _CITATION_RE.finditer(text):
        numbers = [int(n) for n in re.findall(r"\d+", m.group(1))]
        if "-" in m.group(1) and len(numbers) == 2:
            numbers = list(range(numbers[0], numbers[1] + 1))
        found.append((text.count("\n", 0, m.start()), " ".join(m.group(0).split()), numbers))
    return found


# --- checks over the repository ------------------------------------------------------------------------
def broken_references(files: dict[str, str]) -> list[Ref]:
    broken: list[Ref] = []
    for name, text in files.items():
        for first, chunk in prose_chunks(name, text):
            for offset, path in extract_paths(chunk):
                if (name, path) not in NOT_REFERENCES and not (ROOT / path).exists():
                    broken.append(Ref(name, first + offset, path))
        if name.endswith(".md"):
            for offset, target in extract_links(text):
                base = ROOT if target.startswith("/") else (ROOT / name).parent
                resolved = (base / target.lstrip("/")).resolve()
                try:
                    rel = resolved.relative_to(ROOT)
                except ValueError:
                    broken.append(Ref(name, 1 + offset, f"{target} (outside the repository)"))
                    continue
                if rel.parts and rel.parts[0] in SKIPPED_FOLDERS:
                    continue
                if not resolved.exists():
                    broken.append(Ref(name, 1 + offset, target))
    return sorted(set(broken), key=lambda r: (r.file, r.line, r.target))


def design_sections() -> set[int]:
    path = ROOT / DESIGN_DOC
    return {int(n) for n in _HEADING_RE.findall(path.read_text(encoding="utf-8"))} if path.is_file() else set()


@pytest.fixture(scope="module")
def files() -> dict[str, str]:
    return repo_text_files()


def _fail_on(what: str, problems: list[Ref]) -> None:
    """Fail listing every problem as ``file:line -> path`` (no repr of the data behind it)."""
    if problems:
        pytest.fail(f"{len(problems)} {what}:\n" + "\n".join(f"  {p}" for p in problems), pytrace=False)


def test_every_referenced_file_exists(files: dict[str, str]) -> None:
    broken = broken_references({f: text for f, text in files.items() if f not in HISTORICAL})
    _fail_on("references to files that do not exist (file:line -> path)", broken)


def test_every_design_citation_names_an_existing_section(files: dict[str, str]) -> None:
    sections = design_sections()
    assert sections, f"{DESIGN_DOC} has no numbered section headings ('## 1. Architecture')"
    bad = [Ref(name, 1 + offset, f"{cited} (sections: {', '.join(map(str, sorted(sections)))})")
           for name, text in files.items()
           for offset, cited, numbers in design_citations(text)
           if not numbers or any(n not in sections for n in numbers)]
    _fail_on(f"citations of sections {DESIGN_DOC} does not have", bad)


def test_the_old_design_file_name_is_gone(files: dict[str, str]) -> None:
    found = [Ref(name, text.count("\n", 0, m.start()) + 1, _OLD_NAME)
             for name, text in files.items() for m in re.finditer(re.escape(_OLD_NAME), text)]
    _fail_on(f"mentions of {_OLD_NAME} (cite {DESIGN_DOC} section N instead)", found)


def test_the_design_document_has_its_sections_in_order() -> None:
    text = (ROOT / DESIGN_DOC).read_text(encoding="utf-8")
    numbers = [int(n) for n in _HEADING_RE.findall(text)]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 7, numbers


# --- the extraction itself, on real text ----------------------------------------------------------------
def test_paths_are_found_where_prose_names_them() -> None:
    text = ("see `memsys/config.py`, [the doc](docs/results.md) and scripts/test.sh.\n"
            "then benchmarks/perf/bench_memsys.py --questions 600 (research/loop/decide.py:12)")
    assert [p for _, p in extract_paths(text)] == ["memsys/config.py", "docs/results.md", "scripts/test.sh",
                                                  "benchmarks/perf/bench_memsys.py", "research/loop/decide.py"]
    assert [n for n, _ in extract_paths(text)] == [0, 0, 0, 1, 1]


def test_what_is_not_a_path_is_not_extracted() -> None:
    text = ("research.loop.smoke_sample and memsys.retrieve.merge are config keys and modules; "
            "https://github.com/o/r/blob/main/docs/x.md is a URL; ../other/docs/y.md and /abs/memsys/z.py "
            "are outside; runs/bench/out.json is an output; memsys/answer/prompts/<name>/user.txt, "
            "configs/memory/*.yaml, configs/memory/$preset.yaml, memsys/.../x.py and research/{a,b}.py are "
            "placeholders; memsys/ and configs/memory/ are folders; $d/repo/docs/z.md is a variable")
    assert extract_paths(text) == []


def test_markdown_links_skip_urls_anchors_and_code() -> None:
    text = ("[a](results.md#top) [b](https://example.org/x.md) [c](#section) ![d](lifelong_growth.png)\n"
            "`[e](not_a_link.md)`\n```\nfns[0](arg.md)\n```\n[f](../README.md \"title\")")
    assert extract_links(text) == [(0, "results.md"), (0, "lifelong_growth.png"), (5, "../README.md")]


def test_design_citations_are_parsed_with_their_sections() -> None:
    text = "docs/design.md section 2.\n(docs/design.md sections 3 and 4) docs/design.md, section 7"
    assert [(n, s) for n, _, s in design_citations(text)] == [(0, [2]), (1, [3, 4]), (1, [7])]


def test_python_files_are_read_for_comments_and_docstrings_only() -> None:
    source = ('"""Module doc naming docs/design.md."""\n'
              'PATHS = ("memsys/not_there.py",)  # a comment naming scripts/test.sh\n'
              'def f():\n    """Docstring naming harness/surface.py."""\n    return "memsys/also_not.py"\n')
    chunks = prose_chunks("x.py", source)
    paths = [(first + offset, p) for first, chunk in chunks for offset, p in extract_paths(chunk)]
    assert paths == [(1, "docs/design.md"), (2, "scripts/test.sh"), (4, "harness/surface.py")]
