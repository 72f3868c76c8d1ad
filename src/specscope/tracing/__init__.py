"""Teacher-forced trace collection: per output position, what one SD step would emit there."""
