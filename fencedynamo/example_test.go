package fencedynamo_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencedynamo"
)

// Leases in the DynamoDB table "locks". This example needs AWS or
// dynalite, so it only compiles.
func Example() {
	ctx := context.Background()
	// Load cfg with the module github.com/aws/aws-sdk-go-v2/config:
	// config.LoadDefaultConfig(ctx, config.WithRetryer(fencedynamo.Retryer))
	// takes credentials and region from the default AWS chain.
	var cfg aws.Config
	store := fencedynamo.New(dynamodb.NewFromConfig(cfg), "locks")
	if err := store.CreateTable(ctx); err != nil { // once, at setup
		log.Fatal(err)
	}
	client := fence.New(store, fence.WithTTL(30*time.Second))
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
	fmt.Println(fencedynamo.PartitionKey("reports/daily"))
	fmt.Println(fencedynamo.PartitionKey("../ключ"))
	// Output:
	// k.reports/daily
	// k.../~D0~BA~D0~BB~D1~8E~D1~87
}
