module github.com/fencing/fence/fencezk

go 1.26.0

replace github.com/fencing/fence => ..

require github.com/go-zookeeper/zk v1.0.4

require github.com/fencing/fence v0.0.0
