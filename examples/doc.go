// Package examples holds a runnable gateway, sample assistants and sandbox
// image recipes. Nothing imports it.
package examples
