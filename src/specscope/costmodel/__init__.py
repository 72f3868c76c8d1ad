"""Cost models: how long a target forward, a drafting pass and a step's overhead take."""
