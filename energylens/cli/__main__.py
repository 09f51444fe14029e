"""``python -m energylens.cli``."""

import sys

from energylens.cli.main import main

sys.exit(main())
