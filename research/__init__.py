"""The autonomous research loop: propose, edit on a git branch, evaluate, decide."""
