// Command counter-v2 is a vat that counts the requests it answers.
//
// It keeps the count in its data folder ($TOYBOX_DATA/count), so that the
// count survives restarts and upgrades: "v2 count N". See package counter.
package main

import "toybox/examples/counter"

func main() { counter.Main("v2") }
