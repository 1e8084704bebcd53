"""The runtime's test kit: what a model package's tests build on (as transformers' model
tests build on its shared testers). Imports torch only where a helper needs it."""
