module ate.dev/examples/counter

go 1.19
