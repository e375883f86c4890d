package provision

import (
	"fmt"
	"strconv"
	"strings"
)

// AccountID is moto's default account: the ARNs of the local cloud carry it.
const AccountID = "123456789012"

// Lambdas returns the physical values of the template's functions and
// versions, as Lambda would name and number them: a function is named by its
// FunctionName or, when the template leaves it to CloudFormation, by its
// logical id (the name the function runner and every trigger use); a
// version keeps the number it was published with, and a version resource
// new to the template (the CDK names it after a hash of the function's code
// and configuration, so it is new whenever the function changes) is
// published as the function's next number. prev is what the last Up
// recorded (nil on a fresh local cloud).
func Lambdas(t *Template, region, account string, prev map[string]Physical) map[string]Physical {
	phys := map[string]Physical{}
	for _, id := range t.OfType("AWS::Lambda::Function") {
		name := str(t.Resources[id].Properties, "FunctionName")
		if name == "" {
			name = id
		}
		phys[id] = Physical{Type: "AWS::Lambda::Function", Name: name,
			Arn: fmt.Sprintf("arn:aws:lambda:%s:%s:function:%s", region, account, name)}
	}
	latest := map[string]int{} // function name -> highest version number published
	for _, ph := range prev {
		if ph.Type == "AWS::Lambda::Version" {
			n, _ := strconv.Atoi(ph.Version)
			latest[ph.Name] = max(latest[ph.Name], n)
		}
	}
	for _, id := range t.OfType("AWS::Lambda::Version") {
		fnID, _, _ := Ref(t.Resources[id].Properties["FunctionName"])
		fn, ok := phys[fnID]
		if !ok {
			continue // a version of a function outside the template: nothing to run
		}
		v := prev[id].Version
		if prev[id].Type != "AWS::Lambda::Version" || prev[id].Name != fn.Name || v == "" {
			latest[fn.Name]++
			v = strconv.Itoa(latest[fn.Name])
		}
		phys[id] = Physical{Type: "AWS::Lambda::Version", Name: fn.Name, Arn: fn.Arn + ":" + v, Version: v}
	}
	return phys
}

// LocalClusters returns the template's DB clusters as the local PostgreSQL
// cluster at host:port: every AWS::RDS::DBCluster's endpoint resolves there,
// and its DatabaseName is a database of that cluster.
func LocalClusters(t *Template, region, account, host string, port int) map[string]Physical {
	phys := map[string]Physical{}
	for _, id := range t.OfType("AWS::RDS::DBCluster") {
		props := t.Resources[id].Properties
		name := str(props, "DBClusterIdentifier")
		if name == "" {
			name = strings.ToLower(id)
		}
		phys[id] = Physical{Type: "AWS::RDS::DBCluster", Name: name,
			Arn:     fmt.Sprintf("arn:aws:rds:%s:%s:cluster:%s", region, account, name),
			Address: host, Port: strconv.Itoa(port), Database: str(props, "DatabaseName")}
	}
	return phys
}
