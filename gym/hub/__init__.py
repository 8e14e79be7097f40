"""Publishing to the Hugging Face Hub: the model push and the generated Space (`gym deploy`)."""
