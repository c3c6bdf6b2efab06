package policy_test

import (
	"fmt"

	"github.com/loopguard/loopguard/policy"
)

func ExampleSessionKey() {
	body := []byte(`{"model":"m","user":"alice","messages":[]}`)
	fmt.Println(policy.SessionKey([]byte("run-7"), body)) // the header wins
	fmt.Println(policy.SessionKey(nil, body))             // then the body's user
	fmt.Println(policy.SessionKey(nil, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))[:2])
	// Output:
	// run-7
	// alice
	// h:
}
