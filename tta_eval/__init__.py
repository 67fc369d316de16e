"""tta_eval: test-time adaptation methods and evaluation protocols for CCC streams."""

__version__ = "0.1.0"
