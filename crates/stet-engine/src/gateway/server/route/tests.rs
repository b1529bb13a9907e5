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
                assert_eq!(route.shape().api(), api, "{path}");
                match route.wire() {
                    Some(wire) => assert_eq!(wire.api(), api, "{path}"),
                    // Only token counting is served without a meter: it is free.
                    None => assert_eq!(*route, Route::CountTokens, "{path}"),
                }
            }
            None => assert!(route.wire().is_none(), "{path}"),
        }
    }
}

#[test]
fn every_wire_api_the_registry_serves_has_a_route() {
    for api in WireApi::ALL {
        let routed = Route::ALL
            .iter()
            .any(|route| route.api() == Some(*api) && route.wire().is_some());
        assert_eq!(
            routed,
            wire::of(*api).is_some(),
            "{}: served by the registry exactly when a route leads to it",
            api.name()
        );
    }
}

#[test]
fn batches_and_files_are_not_routes_and_are_answered_in_their_api_shape() {
    for path in [
        "/v1/messages/batches",
        "/v1/messages/batches/b1/results",
        "/v1/files",
        "/v1/responses/resp_1",
    ] {
        assert_eq!(Route::of(&Method::POST, path), None, "{path}");
        assert_eq!(Route::of(&Method::GET, path), None, "{path}");
    }
    assert_eq!(
        shape_of_unserved("/v1/messages/batches").api(),
        WireApi::Messages
    );
    assert_eq!(
        shape_of_unserved("/v1/files").api(),
        WireApi::ChatCompletions
    );
}
