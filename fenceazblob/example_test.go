package fenceazblob_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceazblob"
)

// Leases in the container "locks" of the account a connection string
// names. (This example needs an account or Azurite, so it only compiles.)
func Example() {
	ctx := context.Background()
	c, err := container.NewClientFromConnectionString(os.Getenv("AZURE_STORAGE_CONNECTION_STRING"), "locks",
		fenceazblob.ClientOptions())
	if err != nil {
		log.Fatal(err)
	}
	client := fence.New(fenceazblob.New(c), fence.WithTTL(30*time.Second)) // 15s to 60s
	lease, err := client.Acquire(ctx, "reports/daily")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	// Work under lease.Context(): it ends if the lease is lost (a renewal
	// refused, an operator breaking the lease). Send lease.Token() with
	// every write to the protected resource.
	fmt.Println("holding", lease.Key(), "with token", lease.Token())
}

func ExampleBlobName() {
	fmt.Println(fenceazblob.BlobName("reports/daily"))
	fmt.Println(fenceazblob.BlobName("../ключ"))
	// Output:
	// key/reports~2Fdaily
	// key/~2E~2E~2F~D0~BA~D0~BB~D1~8E~D1~87
}

func ExampleLeaseID() {
	// The lease ID an acquisition proposes is derived from its owner id,
	// so an operator can tell whose lease a blob carries.
	fmt.Println(fenceazblob.LeaseID("3f1c0d9a6b2e4c8f9a0b1c2d3e4f5a6b"))
	// Output: b2d03f9e-0cd2-8b84-8a36-c30264b07207
}
