"""Host-side prioritized replay: a NumPy sum tree, the shared buffer and its storages."""

from replay.frames import FrameStackStorage
from replay.prioritized import PrioritizedReplay, Sample
from replay.storage import ArrayStorage
from replay.sum_tree import SumTree

__all__ = ["ArrayStorage", "FrameStackStorage", "PrioritizedReplay", "Sample", "SumTree"]
