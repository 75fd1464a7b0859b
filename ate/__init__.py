"""ate: the command-line client (`ate.cli`) and the one-machine stack runner (`ate.dev`)."""
