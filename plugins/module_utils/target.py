# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The target image of an upgrade, decided once and kept in its journal (pure; upgrade_journal applies it).

An image reference can move: a GCP image family names the newest image published into it. The upgrade
resolves the reference once, at its start, and records the exact image in the journal (`target_image`,
next to the reference asked for, `image`). Every later pass and every resumed run of the same upgrade gives
its heirs that recorded image, whatever the reference resolves to by then. Asking a run for another image
while an upgrade is unfinished is refused unless `new_target` says so: it is an explicit decision to start
a new upgrade, which the journal then records from scratch.
"""

from __future__ import annotations


class TargetConflict(Exception):
    """A run asks for another image than the unfinished upgrade it would resume."""


def _same(a, b):
    return bool(a) and bool(b) and str(a).lower() == str(b).lower()


def decide(journal, image, resolved, new_target=False, where="the journal"):
    """What a run with reference `image` (resolved now to `resolved`, or None when not resolved) does with
    `journal` (a dict, or None when there is none).

    Returns a dict: `target_image` (the exact image every heir gets), `new_journal` (True: the journal
    starts afresh for a new upgrade), `resumed` (an unfinished upgrade goes on), `moved` (the image the
    reference resolves to now when it differs from the recorded target: a family that moved since the
    upgrade started, else None). Raises TargetConflict, naming the new_target option, when the run asks for
    another target than an unfinished upgrade and `new_target` is false."""
    resolved = resolved or None
    if not journal:
        return dict(target_image=resolved, new_journal=True, resumed=False, moved=None)
    recorded = journal.get("target_image")
    same_reference = _same(journal.get("image"), image)
    finished = bool(journal.get("finished"))
    if finished:
        # A finished upgrade: a run of the same target finds nothing to do; another target is a new upgrade.
        if _same(recorded, resolved) or (recorded is None and same_reference):
            return dict(target_image=recorded or resolved, new_journal=False, resumed=False, moved=None)
        return dict(target_image=resolved, new_journal=True, resumed=False, moved=None)
    if recorded is None:
        # An unfinished journal that recorded no exact image yet (written before this rule, or by a run
        # stopped between its start and its first record): the same reference takes it over.
        if same_reference or new_target:
            return dict(target_image=resolved, new_journal=not same_reference, resumed=same_reference, moved=None)
        raise TargetConflict(_conflict_message(journal, image, resolved, where))
    # The same reference, or the recorded exact image itself (asked directly, or as a family now naming it).
    if same_reference or _same(recorded, resolved) or _same(recorded, image):
        moved = resolved if resolved and not _same(recorded, resolved) else None
        if moved and new_target:
            return dict(target_image=resolved, new_journal=True, resumed=False, moved=None)
        return dict(target_image=recorded, new_journal=False, resumed=True, moved=moved)
    if new_target:
        return dict(target_image=resolved, new_journal=True, resumed=False, moved=None)
    raise TargetConflict(_conflict_message(journal, image, resolved, where))


def _conflict_message(journal, image, resolved, where):
    recorded = journal.get("target_image") or journal.get("image")
    asked = image if _same(image, resolved) or not resolved else "%s (now %s)" % (image, resolved)
    return ("an unfinished upgrade (%s, started %s) gives every heir the image %s, asked for as %s; this run asks "
            "for %s. Run again with the image %s to finish that upgrade, or set new_target to true "
            "(rolling_upgrade_new_target in the rolling_upgrade role) to start a new upgrade to %s: nodes already "
            "replaced on %s are then replaced again. Nothing was changed"
            % (where, journal.get("started") or "at an unknown time", recorded, journal.get("image"), asked,
               journal.get("image"), resolved or image, recorded))
