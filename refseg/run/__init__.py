"""Running the method: training, evaluation and its metrics, training curves, the demo."""
