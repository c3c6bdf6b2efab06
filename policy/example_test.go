package policy_test

import (
	"fmt"

	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/loopguard/loopguard/policy"
)

func ExampleIdentify() {
	body := []byte(`{"model":"m","user":"alice","messages":[]}`)
	fmt.Println(policy.Identify(wireapi.Chat, []byte("run-7"), body).Key) // the header wins
	fmt.Println(policy.Identify(wireapi.Chat, nil, body).Key)             // then the body's user
	fmt.Println(policy.Identify(wireapi.Chat, nil, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)).Key[:2])
	// Output:
	// run-7
	// alice
	// h:
}
