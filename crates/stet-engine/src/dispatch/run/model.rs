//! The model gateway of one dispatch ([`ModelLink`]): started on the sandbox's gateway socket before
//! the agent runs, stopped once its work is over (or at teardown); what it reports becomes events,
//! its usage counted by the dispatch's meter.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::dispatch::channels::DispatchChannels;
use crate::dispatch::error::DispatchError;
use crate::dispatch::sandbox::DispatchSandbox;
use crate::gateway::{Gateway, GatewayConfig, GatewayEvent};
use crate::harness::ModelAccess;
use stet_protocol::event::{EventKind, ItemKind, TranscriptItem};

use super::steering::Steering;

/// The model gateway of one dispatch, from provisioning until the agent's work is over, and how the
/// agent reaches it.
pub(super) struct ModelLink {
    gateway: Option<Gateway>,
    /// What the gateway reports while the agent runs.
    pub(super) events: Option<mpsc::Receiver<GatewayEvent>>,
    /// How the agent reaches the model (the relay in the sandbox), when a gateway runs.
    pub(super) access: Option<ModelAccess>,
}

impl ModelLink {
    /// The link before its gateway started; `access`: how the agent will reach it, if one will run.
    pub(super) fn new(access: Option<ModelAccess>) -> ModelLink {
        ModelLink {
            gateway: None,
            events: None,
            access,
        }
    }

    /// Starts the model gateway on the socket in the sandbox's gateway directory (mounted at
    /// `/run/stet`, where the relay in the sandbox reaches it), when a model endpoint is configured.
    pub(super) async fn start(
        &mut self,
        steering: &Steering,
        channels: &DispatchChannels,
        sandbox: &DispatchSandbox,
    ) -> Result<(), DispatchError> {
        let Some(settings) = &steering.parts.settings.gateway else {
            return Ok(());
        };
        let Some(directory) = &sandbox.paths().gateway else {
            return Err(steering.fail(
                "the sandbox was provisioned without the model gateway's socket directory"
                    .to_owned(),
            ));
        };
        let Some(socket) = channels.host_socket(directory, stet_protocol::channel::MODEL) else {
            return Err(steering.fail(
                "the sandbox was provisioned without the model gateway's channel".to_owned(),
            ));
        };
        let config = GatewayConfig {
            upstream: settings.upstream.clone(),
            api_key: settings.api_key.clone(),
            prices: Arc::clone(&settings.prices),
            ceiling_usd: steering.parts.settings.cost_ceiling_usd,
            request_timeout: settings.request_timeout,
            limits: settings.limits,
            policy: Arc::clone(&settings.policy),
        };
        let (gateway, events) = Gateway::start(&socket, config, steering.sanitizer())
            .await
            .map_err(|error| steering.fail(format!("starting the model gateway: {error}")))?;
        let dispatch = &steering.parts.settings;
        if dispatch.mounts.shares_sockets() {
            crate::dispatch::sandbox::hand_over(&socket, dispatch.user).map_err(|error| {
                steering.fail(format!("handing the model gateway over: {error}"))
            })?;
        }
        self.gateway = Some(gateway);
        self.events = Some(events);
        Ok(())
    }

    /// Stops the model gateway (the agent's work is over, or the dispatch is being torn down); usage
    /// it metered for requests that ended as the agent did still counts and is published.
    pub(super) async fn stop(&mut self, steering: &mut Steering) {
        if let Some(gateway) = self.gateway.take() {
            gateway.shutdown().await;
        }
        let Some(mut events) = self.events.take() else {
            return;
        };
        while let Ok(event) = events.try_recv() {
            if let Ok(kind) = gateway_kind(steering, event) {
                steering.publisher.emit(kind).await;
            }
        }
    }
}

/// The next event of the gateway, or never when there is none (a `select!` arm that stays quiet).
pub(super) async fn next_event(
    events: &mut Option<mpsc::Receiver<GatewayEvent>>,
) -> Option<GatewayEvent> {
    match events {
        Some(events) => events.recv().await,
        None => std::future::pending().await,
    }
}

/// The event a gateway report becomes (usage is added to the meter, with the request's latency);
/// the ceiling reached is the stop it causes.
pub(super) fn gateway_kind(
    steering: &mut Steering,
    event: GatewayEvent,
) -> Result<EventKind, DispatchError> {
    match event {
        GatewayEvent::Usage {
            report,
            totals,
            latency,
            ..
        } => {
            let mut usage = steering.meter.add_settled(report, totals);
            usage.latency_ms = Some(u64::try_from(latency.as_millis()).unwrap_or(u64::MAX));
            Ok(EventKind::Usage(usage))
        }
        GatewayEvent::Error { message } => Ok(EventKind::Transcript(TranscriptItem {
            item: ItemKind::Error,
            text: message,
        })),
        GatewayEvent::Refused { refusal } => {
            let sanitizer = steering.sanitizer();
            Ok(EventKind::GatewayRefusal {
                api: sanitizer.sanitize(refusal.api.name()),
                field: sanitizer.sanitize(&refusal.field),
                value_kind: sanitizer.sanitize(refusal.value_kind),
                rule: sanitizer.sanitize(refusal.rule.name()),
                setting: refusal
                    .rule
                    .setting()
                    .map(|setting| sanitizer.sanitize(setting)),
            })
        }
        GatewayEvent::Egress {
            api,
            tool,
            host,
            price_usd,
        } => Ok(EventKind::GatewayEgress {
            api: steering.sanitizer().sanitize(api.name()),
            tool,
            host,
            price_usd,
        }),
        GatewayEvent::CeilingReached {
            spent_usd,
            ceiling_usd,
            needed_usd,
        } => Err(DispatchError::CostCeilingHit {
            spent_usd,
            ceiling_usd,
            needed_usd,
            refused: true,
        }),
    }
}
