"""Data as feeds (one dict per model call): the forms data may take, loading them, and
the pipeline's metric over a model's outputs.

    feeds.py         Calibration, evaluation and training data as feeds: one feed is one complete ...
    forms.py         The forms data may take (see compress.data.feeds), turned into checked feeds.
    metric.py        The pipeline's metric on a model's outputs over the evaluation feeds: accuracy, ...
"""
