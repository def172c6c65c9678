"""What the operator does to a target: apply and delete objects, run helm, claim it."""
