"""Data: the label schema, data set folders, synthetic welds, and the network's inputs."""
