"""python3 -m analysis.figures RESULTS.h5 [MORE.h5 ...] --out DIR (see analysis/figures/__init__.py)."""
import sys

from analysis.figures import main

sys.exit(main())
