"""``python -m dynashape.integrations.skyrl <SkyRL overrides>``: SkyRL's trainer with a dynashape estimator."""

from dynashape.integrations.skyrl.entrypoint import main

main()
