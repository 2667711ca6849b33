module github.com/fencing/fence

go 1.26
