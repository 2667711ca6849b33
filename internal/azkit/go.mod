module github.com/fencing/fence/internal/azkit

go 1.26.0

replace github.com/fencing/fence => ../..

require (
	github.com/Azure/azure-sdk-for-go/sdk/azcore v1.24.0
	github.com/fencing/fence v0.0.0
)

require (
	github.com/Azure/azure-sdk-for-go/sdk/internal v1.13.0 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)
