"""Thin typer front-end: every command is a few lines over a library call."""
