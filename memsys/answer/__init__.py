"""Answer generation: prompt templates (files), JSON output, strict parsing."""

from memsys.answer.generate import Answer, answer_question, build_messages

__all__ = ["Answer", "answer_question", "build_messages"]
