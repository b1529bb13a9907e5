//! Unit tests of `crate::gateway::server::route`: every route of a wire API reaches the registry's
//! implementation of it, and every kind the registry serves has a route.

use super::*;

#[test]
fn every_route_of_a_wire_api_reaches_its_implementation() {
    for route in Route::ALL {
        let method = if *route == Route::Models {
            Method::GET
        } else {
            Method::POST
        };
        let path = format!("/v1/{}", route.rest());
        assert_eq!(Route::of(&method, &path), Some(*route), "{path}");
        match route.api() {
            Some(api) => {
                let wire = route.wire().expect("a route's wire API is in the registry");
                assert_eq!(wire.api(), api, "{path}");
            }
            None => assert!(route.wire().is_none(), "{path}"),
        }
    }
}

#[test]
fn every_wire_api_the_registry_serves_has_a_route() {
    for api in WireApi::ALL {
        let routed = Route::ALL.iter().any(|route| route.api() == Some(*api));
        assert_eq!(
            routed,
            wire::of(*api).is_some(),
            "{}: served by the registry exactly when a route leads to it",
            api.name()
        );
    }
}
