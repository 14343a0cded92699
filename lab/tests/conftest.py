"""The lab's tests share the product's fixtures (real repositories, real images, an empty user config) and its
helpers (tests/ on the path); the product's conftest is loaded here under its own name."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

PRODUCT_TESTS = Path(__file__).resolve().parents[2] / "tests"
sys.path.insert(0, str(PRODUCT_TESTS))
_spec = importlib.util.spec_from_file_location("product_conftest", PRODUCT_TESTS / "conftest.py")
product_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(product_conftest)
globals().update({name: value for name, value in vars(product_conftest).items() if not name.startswith("__")})
