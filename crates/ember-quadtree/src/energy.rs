//! The energy-harvesting simulator (feature `std`): a capacitor charged by a supply and
//! drained by every flash operation (its modeled cost) and by the CPU and board while they
//! run; power fails when the capacitor falls to the off threshold and comes back at the on
//! threshold, as on the paper's testbed (§V-A: 10 mF, on at 3.3 V, off at 2.3 V, 7 mA at
//! 3.3 V). Random blackouts at any flash operation can be added on top.
//!
//! [`Harvested`] wraps any flash device (normally a [`SimFlash`](ember_device::SimFlash)
//! with [`CostModel::MSP430_NOR`]) and keeps a modeled clock. A write that runs out of
//! energy lands a prefix of its bytes (as far as the energy reached); an erase that runs out
//! leaves its units unchanged. After a failure every operation fails with
//! [`DeviceError::PowerLost`] until [`Harvested::recharge`] waits (in modeled time) for the
//! capacitor to reach the on threshold.

use std::vec::Vec;

use ember_device::{CostModel, DeviceError, FlashDevice, FlashGeometry, Op, SplitMix64};

/// What charges the capacitor.
#[derive(Debug, Clone, PartialEq)]
pub enum Supply {
    /// A constant current at a voltage (the bench supply: 7 mA at 3.3 V).
    Constant {
        /// Amperes.
        amps: f64,
        /// Volts.
        volts: f64,
    },
    /// A replayable power trace: watts per sample, `dt` seconds per sample, looped, scaled.
    Trace {
        /// Power of each sample in watts.
        watts: Vec<f64>,
        /// Seconds per sample.
        dt: f64,
        /// Factor applied to every sample (the paper scales its solar trace by 0.1).
        scale: f64,
    },
}

impl Supply {
    /// The paper's bench supply: 7 mA at 3.3 V.
    pub fn paper() -> Self {
        Supply::Constant {
            amps: 0.007,
            volts: 3.3,
        }
    }

    /// Power delivered at modeled time `t` (seconds).
    fn watts(&self, t: f64) -> f64 {
        match self {
            Supply::Constant { amps, volts } => amps * volts,
            Supply::Trace { watts, dt, scale } => {
                if watts.is_empty() || *dt <= 0.0 {
                    return 0.0;
                }
                let i = ((t / dt) as u64 % watts.len() as u64) as usize;
                watts[i] * scale
            }
        }
    }

    /// Seconds until the current sample ends (infinite for a constant supply).
    fn sample_left(&self, t: f64) -> f64 {
        match self {
            Supply::Constant { .. } => f64::INFINITY,
            Supply::Trace { dt, .. } if *dt > 0.0 => dt - t % dt,
            Supply::Trace { .. } => f64::INFINITY,
        }
    }
}

/// The capacitor, the thresholds, and the load besides flash.
#[derive(Debug, Clone, PartialEq)]
pub struct EnergyModel {
    /// Farads (10 mF).
    pub capacitance: f64,
    /// The device switches on when the capacitor reaches this voltage (3.3 V).
    pub v_on: f64,
    /// ... and off when it falls to this one (2.3 V).
    pub v_off: f64,
    /// The charging supply.
    pub supply: Supply,
    /// Power the CPU and the board draw while on (watts), on top of flash operations.
    pub board_watts: f64,
    /// CPU time spent around each flash operation (driver code), in seconds.
    pub cpu_per_flash_op: f64,
    /// Flash costs.
    pub cost: CostModel,
}

impl EnergyModel {
    /// The paper's testbed: 10 mF, 3.3 V on, 2.3 V off, 7 mA at 3.3 V; the MSP430 board
    /// draws 6.5 mA at 3.3 V while on (so that, with flash work, it draws more than the
    /// supply gives, as on the testbed), 2 µs of CPU per flash operation, Table I costs.
    pub fn paper() -> Self {
        EnergyModel {
            capacitance: 0.010,
            v_on: 3.3,
            v_off: 2.3,
            supply: Supply::paper(),
            board_watts: 0.0065 * 3.3,
            cpu_per_flash_op: 2e-6,
            cost: CostModel::MSP430_NOR,
        }
    }

    fn energy_at(&self, v: f64) -> f64 {
        0.5 * self.capacitance * v * v
    }
}

/// What the simulator has seen.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EnergyStats {
    /// Modeled seconds since the start (on and off).
    pub time_s: f64,
    /// Modeled seconds the device was on.
    pub on_s: f64,
    /// Power failures (capacitor empty, or a random blackout).
    pub failures: u64,
    /// Of those, random blackouts.
    pub blackouts: u64,
    /// Joules drawn by the device (flash and board).
    pub energy_j: f64,
    /// Joules drawn by flash operations alone.
    pub flash_j: f64,
    /// Modeled seconds of flash reads, writes and erases (with the CPU time charged around
    /// each operation), and how many of each.
    pub read_s: f64,
    /// See `read_s`.
    pub write_s: f64,
    /// See `read_s`.
    pub erase_s: f64,
    /// Read, write and erase operations charged.
    pub ops: [u64; 3],
    /// Bytes read, written and erased.
    pub bytes: [u64; 3],
}

/// A flash device powered by a harvester.
#[derive(Debug)]
pub struct Harvested<F: FlashDevice> {
    dev: F,
    model: EnergyModel,
    /// Joules in the capacitor.
    stored: f64,
    on: bool,
    stats: EnergyStats,
    /// Random blackouts: the chance of one at each counted operation, and the dice.
    blackout: Option<(f64, SplitMix64)>,
}

impl<F: FlashDevice> Harvested<F> {
    /// Wraps `dev`; the capacitor starts charged to the on threshold.
    pub fn new(dev: F, model: EnergyModel) -> Self {
        let stored = model.energy_at(model.v_on);
        Harvested {
            dev,
            model,
            stored,
            on: true,
            stats: EnergyStats::default(),
            blackout: None,
        }
    }

    /// Adds random blackouts: each write or erase fails with probability `p`.
    pub fn with_blackouts(mut self, p: f64, seed: u64) -> Self {
        self.blackout = Some((p, SplitMix64::new(seed)));
        self
    }

    /// What the simulator has seen.
    pub fn stats(&self) -> EnergyStats {
        self.stats
    }

    /// The capacitor's voltage.
    pub fn voltage(&self) -> f64 {
        (2.0 * self.stored / self.model.capacitance).sqrt()
    }

    /// Whether the device has power.
    pub fn is_on(&self) -> bool {
        self.on
    }

    /// The wrapped device.
    pub fn inner(&self) -> &F {
        &self.dev
    }

    /// The wrapped device, mutably.
    pub fn inner_mut(&mut self) -> &mut F {
        &mut self.dev
    }

    /// Unwraps.
    pub fn into_inner(self) -> F {
        self.dev
    }

    /// Charges CPU work of `seconds` (computation between flash operations). Returns
    /// `false` if power failed during it.
    pub fn cpu(&mut self, seconds: f64) -> bool {
        self.on && self.spend(seconds, 0.0) >= 1.0
    }

    /// Runs the device for `t` seconds drawing `flash_j` joules for flash besides the board;
    /// returns the fraction of the work done before the capacitor emptied (1.0: all).
    fn spend(&mut self, t: f64, flash_j: f64) -> f64 {
        let m = &self.model;
        let draw = flash_j + m.board_watts * t;
        let gain = m.supply.watts(self.stats.time_s) * t;
        let floor = m.energy_at(m.v_off);
        let after = self.stored + gain - draw;
        if after > floor {
            self.stored = after.min(m.energy_at(m.v_on).max(self.stored));
            self.account(t, draw, flash_j);
            return 1.0;
        }
        // The capacitor empties part-way through.
        let avail = self.stored - floor;
        let net = draw - gain;
        let frac = if net > 0.0 {
            (avail / net).clamp(0.0, 1.0)
        } else {
            1.0
        };
        self.account(t * frac, draw * frac, flash_j * frac);
        self.stored = floor;
        self.on = false;
        self.stats.failures += 1;
        frac
    }

    fn account(&mut self, t: f64, draw: f64, flash_j: f64) {
        self.stats.time_s += t;
        self.stats.on_s += t;
        self.stats.energy_j += draw;
        self.stats.flash_j += flash_j;
    }

    /// Waits, switched off, until the capacitor reaches the on threshold. `false` if the
    /// supply can never get it there (a trace of zeros).
    pub fn recharge(&mut self) -> bool {
        let target = self.model.energy_at(self.model.v_on);
        for _ in 0..10_000_000 {
            if self.stored >= target {
                self.on = true;
                return true;
            }
            let t = self.stats.time_s;
            let p = self.model.supply.watts(t);
            let left = self.model.supply.sample_left(t);
            if p <= 0.0 {
                if !left.is_finite() {
                    return false;
                }
                self.stats.time_s += left.max(1e-9);
                continue;
            }
            let need = (target - self.stored) / p;
            let step = need.min(left.max(1e-9));
            self.stored += p * step;
            self.stats.time_s += step;
            if step >= need {
                self.stored = target;
            }
        }
        false
    }

    /// Charges one flash operation; `Ok(fraction)` of it that had power.
    fn charge(&mut self, op: Op, bytes: u64) -> Result<f64, DeviceError> {
        if !self.on {
            return Err(DeviceError::PowerLost { op });
        }
        if op != Op::Read
            && let Some((p, rng)) = &mut self.blackout
            && unit(rng) < *p
        {
            let frac = unit(rng);
            self.on = false;
            self.stats.failures += 1;
            self.stats.blackouts += 1;
            return Ok(frac);
        }
        let c = &self.model.cost;
        let (ns, pj) = match op {
            Op::Read => (c.read_ns_per_byte, c.read_pj_per_byte),
            Op::Erase => (c.erase_ns_per_byte, c.erase_pj_per_byte),
            _ => (c.write_ns_per_byte, c.write_pj_per_byte),
        };
        let t = (c.ns_per_op + ns * bytes) as f64 * 1e-9 + self.model.cpu_per_flash_op;
        let e = (c.pj_per_op + pj * bytes) as f64 * 1e-12;
        let frac = self.spend(t, e);
        let k = match op {
            Op::Read => 0,
            Op::Erase => 2,
            _ => 1,
        };
        let st = &mut self.stats;
        st.ops[k] += 1;
        st.bytes[k] += bytes;
        *[&mut st.read_s, &mut st.write_s, &mut st.erase_s][k] += t * frac;
        Ok(frac)
    }
}

/// A uniform draw in `[0, 1)`.
fn unit(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

impl<F: FlashDevice> FlashDevice for Harvested<F> {
    fn geometry(&self) -> FlashGeometry {
        self.dev.geometry()
    }

    fn read(&mut self, offset: u64, buf: &mut [u8]) -> ember_device::Result<()> {
        if self.charge(Op::Read, buf.len() as u64)? < 1.0 {
            return Err(DeviceError::PowerLost { op: Op::Read });
        }
        self.dev.read(offset, buf)
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> ember_device::Result<()> {
        let frac = self.charge(Op::Write, data.len() as u64)?;
        if frac >= 1.0 && self.on {
            return self.dev.write(offset, data);
        }
        // Power failed part-way: the bytes programmed so far landed.
        let n = ((data.len() as f64) * frac) as usize;
        if n > 0 {
            let _ = self.dev.write(offset, &data[..n.min(data.len())]);
        }
        Err(DeviceError::PowerLost { op: Op::Write })
    }

    fn erase(&mut self, offset: u64, len: u64) -> ember_device::Result<()> {
        let frac = self.charge(Op::Erase, len)?;
        if frac >= 1.0 && self.on {
            return self.dev.erase(offset, len);
        }
        // Power failed part-way: the whole units erased before it are erased.
        let es = u64::from(self.dev.geometry().erase_size.max(1));
        let done = ((len / es) as f64 * frac) as u64 * es;
        if done > 0 {
            let _ = self.dev.erase(offset, done);
        }
        Err(DeviceError::PowerLost { op: Op::Erase })
    }

    fn sync(&mut self) -> ember_device::Result<()> {
        if self.on {
            self.dev.sync()
        } else {
            Err(DeviceError::PowerLost { op: Op::Sync })
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ember_device::SimFlash;

    fn dev(model: EnergyModel) -> Harvested<SimFlash<ember_device::MemBlock<Vec<u8>>>> {
        let f =
            SimFlash::in_memory(FlashGeometry::nor(64 * 512, 512), CostModel::MSP430_NOR).unwrap();
        Harvested::new(f, model)
    }

    #[test]
    fn the_capacitor_empties_then_recharges_in_the_modeled_time() {
        let mut h = dev(EnergyModel::paper());
        let mut writes = 0u64;
        while h.write(writes * 8 % (64 * 512), &[0u8; 8]).is_ok() {
            writes += 1;
            if writes.is_multiple_of(4000) {
                h.erase(0, 64 * 512).unwrap_or(());
            }
        }
        let s = h.stats();
        assert_eq!(s.failures, 1);
        // Usable energy: ½·C·(3.3² − 2.3²) = 28 mJ; the net drain is the board and flash
        // minus the 23.1 mW supply.
        assert!((h.voltage() - 2.3).abs() < 1e-9);
        assert!(s.on_s > 1.0 && s.on_s < 60.0, "{s:?}");
        assert!(h.write(0, &[0]).is_err());
        let off = s.time_s;
        assert!(h.recharge());
        // 28 mJ at 23.1 mW: 1.21 s.
        let t = h.stats().time_s - off;
        assert!((t - 0.028 / 0.0231).abs() < 0.01, "{t}");
        assert!(h.write(1, &[0]).is_ok());
    }

    #[test]
    fn a_trace_of_zeros_never_charges_and_blackouts_strike_at_random() {
        let mut m = EnergyModel::paper();
        m.supply = Supply::Trace {
            watts: std::vec![0.0; 4],
            dt: 0.5,
            scale: 1.0,
        };
        let mut h = dev(m);
        while h.write(0, &[0]).is_ok() {}
        assert!(!h.recharge());
        let mut h = dev(EnergyModel::paper()).with_blackouts(0.01, 7);
        let mut n = 0;
        while h.write(n % 1000, &[0]).is_ok() {
            n += 1;
        }
        assert_eq!(h.stats().blackouts, 1);
        assert!(n < 2000);
    }
}
