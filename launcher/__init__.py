"""The ``memsys`` program's dispatcher: one entry point, subcommands owned by their packages.

It sits above every other package (it imports memsys, research), so none of them has to
import its siblings' command modules; nothing imports it.
"""
