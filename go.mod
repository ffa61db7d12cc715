module github.com/mrlab/mrlab

go 1.26.0

require (
	golang.org/x/net v0.63.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
