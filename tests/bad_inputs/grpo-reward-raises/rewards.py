def exact(completions, answer, **kwargs):
    return [float(c[0]["content"] == a) for c, a in zip(completions, answers)]
