"""Torch rendering backend (work in progress, issue 29)."""
