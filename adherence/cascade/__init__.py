"""Judge cascades with a stated guarantee: cheap stages decide the turns they are sure of, the rest go on.

``adherence cascade fit`` learns each stage's acceptance threshold (``adherence.stats._cascade``); ``adherence score
--cascade`` runs the stages as resumable engine passes, each later one only on the turns the earlier ones left
(``CascadeEngine``); ``adherence cascade apply`` makes the same decision on tables already scored.
"""

from ._engine import CascadeEngine, stage_name
from ._file import FORMAT, cascade_digest, load_cascade, stage_configs

__all__ = [
    "CascadeEngine",
    "FORMAT",
    "cascade_digest",
    "load_cascade",
    "stage_configs",
    "stage_name",
]
