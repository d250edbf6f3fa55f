"""What a user reads: the HTML report with its figures, and the tables printed in the terminal.

Owns: the report's data, figures and HTML, and the terminal tables of a run and of a sweep.
May import: ``research.journal``; nothing of the loop.
Called by: ``research.commands`` (``memsys report``, the end of ``memsys run``/``eval``).
"""
