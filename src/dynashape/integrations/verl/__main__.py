"""``python -m dynashape.integrations.verl --check``: the plugin doctor (``dynashape.integrations.verl.doctor``)."""

import sys

from dynashape.integrations.verl.doctor import main

sys.exit(main())
