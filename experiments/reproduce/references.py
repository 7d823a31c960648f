"""The papers' reference scores (atari_scores.csv: random, human, Ape-X, IMPALA per game)."""

import csv
import math
import os

SCORES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "atari_scores.csv")
PAPER_COLUMNS = {"apex": "apex_noop", "impala": "impala_deep",
                 "impala_shallow": "impala_shallow"}
# The emulator frames behind each column's scores: Ape-X trained for 5 days, 22.8B frames
# (Horgan et al. 2018, Table 1); IMPALA's single-game experts 200M frames each (Espeholt et
# al. 2018, the single-task Atari results). A score after fewer frames is compared only with
# that said.
PAPER_FRAMES = {"apex_noop": 22_800_000_000, "impala_deep": 200_000_000,
                "impala_shallow": 200_000_000}


def frames_label(column: str) -> str:
    """'22.8B frames' or '200M frames': how many frames the column's scores were reached at."""
    frames = PAPER_FRAMES[column]
    return f"{frames / 1e9:g}B frames" if frames >= 1e9 else f"{frames / 1e6:g}M frames"


def load_references(path: str = SCORES_FILE) -> dict[str, dict[str, float]]:
    """{game: {column: score}}; an empty cell is NaN (a number the file does not vouch for)."""
    with open(path, newline="") as f:
        rows = csv.DictReader(line for line in f if not line.startswith("#"))
        return {row["game"]: {k: float(v) if v else math.nan for k, v in row.items()
                              if k != "game"} for row in rows}


def paper_column(agent: str, torso: str = "") -> str:
    """The column of the paper's scores for `agent` (a name of `agents.registry`). IMPALA with the
    shallow torso compares with the IMPALA paper's shallow network; Ape-X has one column
    whatever its torso (its paper reports the dueling Nature network only)."""
    from agents import registry  # here: reading the scores file needs no agent's imports

    registry.get(agent)  # a ValueError naming the agents for any other name
    if agent == "impala" and torso == "impala_shallow":
        return PAPER_COLUMNS["impala_shallow"]
    return PAPER_COLUMNS[agent]
