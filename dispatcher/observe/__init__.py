"""What operators see of a running dispatcher: metrics, health endpoints, logs."""
