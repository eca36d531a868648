package pgtest

// WithDatabase exposes withDatabase to the external tests.
var WithDatabase = withDatabase
