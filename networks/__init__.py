"""Flax torsos and heads: pure functions of observations, no env or agent knowledge."""
from networks._conv_utils import NORMS
from networks.heads import DuelingQHead, PolicyValueHead, QHead
from networks.impala_resnet import ImpalaResNetTorso
from networks.torsos import (TORSOS, ImpalaShallowTorso, MLPTorso, NatureTorso, make_torso,
                             torso_features)

__all__ = [
    "NORMS", "TORSOS", "DuelingQHead", "PolicyValueHead", "QHead", "ImpalaResNetTorso",
    "ImpalaShallowTorso", "MLPTorso", "NatureTorso", "make_torso", "torso_features",
]
