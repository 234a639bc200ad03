"""Makes the in-tree package importable; libffpa comes from FFPA_LIBRARY."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if not os.environ.get("FFPA_TEST_INSTALLED"):  # else: the installed package (pip install ./python)
    sys.path.insert(0, os.path.dirname(HERE))  # python/ (the ffpa package)
sys.path.insert(0, HERE)                   # reference.py
