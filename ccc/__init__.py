"""ccc: the CCC benchmark (Continuously Changing Corruptions).

Sub-packages: :mod:`ccc.corruptions` (ImageNet-C corruptions with continuous severity).
"""

__version__ = "0.1.0"
