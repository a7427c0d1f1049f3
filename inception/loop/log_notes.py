"""The notes that follow a loss line when something counted since the last one: damaged input
records skipped, and updates that gradient clipping clipped."""

from inception.config import tags


class LogNotes:
    """Remembers what was reported, so that each note says what is new."""

    def __init__(self):
        self.corrupt = self.clipped = 0

    def report(self, session, graph, updates, log):
        """Logs the counts of `graph` (a step_graph.TrainGraph) that grew since the last
        report; `updates`: the updates run since then."""
        fetches = {"corrupt": graph.corrupt_records}
        if graph.clipped_updates is not None:
            fetches["clipped"] = graph.clipped_updates
        counts = {name: int(value) for name, value in session.run(fetches).items()}
        if counts["corrupt"] > self.corrupt:
            log(f"note: {counts['corrupt']} damaged input record(s) skipped so far (named "
                f"above; {tags.CORRUPT_RECORDS} in TensorBoard; --strict_input stops "
                "instead).")
        self.corrupt = counts["corrupt"]
        clipped = counts.get("clipped", 0)
        if clipped > self.clipped:
            log(f"note: --clip_gradient_norm clipped {clipped - self.clipped} of the last "
                f"{updates} update(s), {clipped} in this run ({tags.CLIPPED_UPDATES} in "
                "TensorBoard).")
        self.clipped = clipped
