"""A rule of the default schedule: one strategy for one kind of block.

As TVM's dlight `ScheduleRule`s are tried on a PrimFunc in order until one applies, the
default schedule tries its `BlockRule`s on each block in order (schedule/__init__.py's
RULES): `match` says whether the rule is for the block (with what it found: its plan),
`apply` schedules it, and the rules after it are not tried. A rule that makes blocks of its
own (the copy of a transposed or padded operand) schedules them with `schedule_block`, the
rules' entry for one block.
"""
from __future__ import annotations


class BlockRule:
    name = "rule"

    def match(self, sch, block, info):
        """The plan for the block (anything but None) where this rule is for it, else None.
        `info` is analysis.BlockInfo."""
        raise NotImplementedError

    def apply(self, sch, block, info, plan, schedule_block) -> None:
        """Schedule the block by `plan`; `schedule_block(sch, block)` schedules a block this
        rule made by the rules."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<schedule rule {self.name}>"
