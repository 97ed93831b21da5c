"""kvlab analysis: read kvlab HDF5 result files (and nothing else) into pandas, make figures,
an HTML report, and compare two result files.

    python3 -m analysis.figures RESULTS.h5 --out DIR
    python3 -m analysis.report  RESULTS.h5 --out report.html
    python3 -m analysis.compare BASE.h5 NEW.h5
"""
