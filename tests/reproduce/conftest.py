"""The reproduction scripts import their sibling modules as scripts do (their folder first on
sys.path)."""

import os
import sys

REPRODUCE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "experiments", "reproduce")
if REPRODUCE not in sys.path:
    sys.path.insert(0, REPRODUCE)
