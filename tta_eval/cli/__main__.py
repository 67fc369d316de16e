"""``python -m tta_eval.cli``: the ``tta-eval`` command."""

import sys

from tta_eval.cli import main

sys.exit(main())
