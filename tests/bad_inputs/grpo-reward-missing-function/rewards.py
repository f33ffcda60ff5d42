def closeness(completions, answer, **kwargs):
    return [0.0 for _ in completions]
