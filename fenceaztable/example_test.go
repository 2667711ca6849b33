package fenceaztable_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceaztable"
)

// Leases in the table "locks" of the account a connection string names
// (an Azure Storage account, or a Cosmos DB account's Table API). This
// example needs an account or Azurite, so it only compiles.
func Example() {
	ctx := context.Background()
	svc, err := aztables.NewServiceClientFromConnectionString(os.Getenv("AZURE_STORAGE_CONNECTION_STRING"),
		fenceaztable.ClientOptions())
	if err != nil {
		log.Fatal(err)
	}
	client := fence.New(fenceaztable.New(svc.NewClient("locks")), fence.WithTTL(30*time.Second))
	lease, err := client.Acquire(ctx, "reports/daily")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	// Work under lease.Context(): it ends if the lease is lost. Send
	// lease.Token() with every write to the protected resource.
	fmt.Println("holding", lease.Key(), "with token", lease.Token())
}

func ExamplePartitionKey() {
	fmt.Println(fenceaztable.PartitionKey("reports/daily"))
	fmt.Println(fenceaztable.PartitionKey("../ключ"))
	// Output:
	// k.reports~2Fdaily
	// k.~2E~2E~2F~D0~BA~D0~BB~D1~8E~D1~87
}
