"""The trainers TRL keeps under trl.experimental, at the same module paths."""
