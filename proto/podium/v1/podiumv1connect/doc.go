// Package podiumv1connect holds the Connect clients and handlers generated
// from podium.v1 (`make proto`).
package podiumv1connect
