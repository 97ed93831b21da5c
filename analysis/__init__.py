"""kvlab analysis: read kvlab HDF5 result files (and nothing else) into pandas, make figures,
an HTML report, and compare two result files.

    python3 -m analysis.figures RESULTS.h5 --out DIR
    python3 -m analysis.report  RESULTS.h5 --out report.html
    python3 -m analysis.compare BASE.h5 NEW.h5
"""

import os as _os
import sys as _sys

# analysis reads result files through the kvlab package (kvlab.load). An installed kvlab
# (pip install .) or a build's package (<build>/python) is used when importable; otherwise
# its pure-Python sources in this checkout, which is all that reading results needs.
try:
    import kvlab as _kvlab  # noqa: F401
except ImportError:
    _sys.path.append(_os.path.join(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))),
                                   "experiments", "python"))
