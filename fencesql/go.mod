module github.com/fencing/fence/fencesql

go 1.26.0

replace github.com/fencing/fence => ..

require github.com/fencing/fence v0.0.0
