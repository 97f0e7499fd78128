//! Setting a status condition the way upstream's helpers do, for every condition shape mco
//! writes (pool conditions, and the `metav1.Condition` shape of rollout policies).

use mco_api::MachineConfigPoolCondition;
use mco_api::rollouts::PolicyCondition;

/// A condition with upstream's five fields.
pub trait Condition: Default {
    fn type_(&self) -> &str;
    fn status(&self) -> &str;
    /// `status`, `reason`, `message` and `lastTransitionTime`, to write.
    fn fields(&mut self) -> Fields<'_>;
}

pub struct Fields<'a> {
    pub type_: &'a mut String,
    pub status: &'a mut String,
    pub reason: &'a mut String,
    pub message: &'a mut String,
    pub last_transition_time: &'a mut Option<String>,
}

macro_rules! condition {
    ($t:ty) => {
        impl Condition for $t {
            fn type_(&self) -> &str {
                &self.type_
            }
            fn status(&self) -> &str {
                &self.status
            }
            fn fields(&mut self) -> Fields<'_> {
                Fields {
                    type_: &mut self.type_,
                    status: &mut self.status,
                    reason: &mut self.reason,
                    message: &mut self.message,
                    last_transition_time: &mut self.last_transition_time,
                }
            }
        }
    };
}
condition!(MachineConfigPoolCondition);
condition!(PolicyCondition);

/// Upstream's `SetMachineConfigPoolCondition`: sets `type_` in `list`; the transition time moves
/// only when the status changes.
pub fn set_condition<C: Condition>(
    list: &mut Vec<C>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: &str,
) {
    let status = if status { "True" } else { "False" };
    let i = match list.iter().position(|c| c.type_() == type_) {
        Some(i) => i,
        None => {
            let mut c = C::default();
            *c.fields().type_ = type_.to_string();
            list.push(c);
            list.len() - 1
        }
    };
    let c = &mut list[i];
    let moved = c.status() != status;
    let f = c.fields();
    if moved {
        *f.last_transition_time = Some(now.to_string());
    }
    *f.status = status.to_string();
    *f.reason = reason.to_string();
    *f.message = message.to_string();
}
