// Package layers holds no code: its test pins the house's import layers
// (docs/architecture.md, "The layers"), which the compiler alone does not
// keep, as a cycle is only one way to break them.
package layers
