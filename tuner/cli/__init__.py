"""The command line: thin typer commands that parse, call one function, render."""
